from tailbudget.cli import main

main()
