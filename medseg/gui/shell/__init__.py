"""The window frame: the main window, its menus, status messages, settings, About and the shortcut list."""
