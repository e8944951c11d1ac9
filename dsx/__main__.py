from dsx.cli import main

main()
