"""Resolution: processes, communicator instances, global ranks and per-rank progress from parsed tables."""
