"""Widget plumbing every room uses: binding widgets to properties, the one job runner and its status, the wheel guard, save dialogs."""
