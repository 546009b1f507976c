from soak.run import main

raise SystemExit(main())
