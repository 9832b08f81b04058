from workloads.features.cli import main

raise SystemExit(main())
