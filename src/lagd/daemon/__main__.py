from lagd.daemon import command

command()
