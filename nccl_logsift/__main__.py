from nccl_logsift.cli import main

main()
