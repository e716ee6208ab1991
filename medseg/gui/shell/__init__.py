"""The window frame: the main window, its menus, status messages, banners, settings, About and the shortcut list."""
