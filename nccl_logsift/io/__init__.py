"""Reading inputs: paths into sources, sources into bounded chunks of lines."""
