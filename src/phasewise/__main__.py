from phasewise.cli import main

main()
