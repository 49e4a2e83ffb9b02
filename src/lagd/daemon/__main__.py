from lagd.daemon.main import main

main()
