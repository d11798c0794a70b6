from laminardb.cli.commands import main

raise SystemExit(main())
