from gpuscope.console import main

main()
