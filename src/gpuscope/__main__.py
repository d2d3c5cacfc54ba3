from gpuscope.cli import main

main()
