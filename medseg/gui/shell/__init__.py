"""The window frame: the main window, its menus, status messages, About and the shortcut list."""
