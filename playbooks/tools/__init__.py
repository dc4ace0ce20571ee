"""Tool modules of the example playbooks (loaded from this folder, beside the YAML files)."""
