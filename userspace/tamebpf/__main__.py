from tamebpf.cli import main

raise SystemExit(main())
