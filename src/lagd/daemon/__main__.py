from lagd.daemon import main

main()
