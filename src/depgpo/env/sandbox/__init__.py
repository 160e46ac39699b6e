"""The sandbox: layout, privilege levels, mounts, the init inside it, the interactive shell, file state."""
