from palace_client.entry import main

main()
