"""Writing outputs safely: atomic writes, run directories and their ownership, disk checks, fault points."""
