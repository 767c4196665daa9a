from palace_client.cli import main

main()
