"""pytest hooks that add remote-affected tests to testmon's selection."""
