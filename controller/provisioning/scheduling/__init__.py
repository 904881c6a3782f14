"""The scheduling core shared by `karpy plan`, the controller and the extender: no I/O."""
