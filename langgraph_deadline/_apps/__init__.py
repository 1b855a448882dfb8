"""Programs shipped with the package: the demo."""
