"""Widget plumbing every room uses: binding widgets to properties, the one job runner and its status, the app's settings and log file, the wheel guard, save dialogs."""
