from palaced.cli import main

main()
