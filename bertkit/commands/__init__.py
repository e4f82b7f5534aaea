"""The commands layer: one module per command (`bertkit.commands.<name>`), each holding the command's config - a few
nested option groups the library packages own (`cfg.inputs`, `cfg.reading`, `cfg.training`...: `bertkit.options.group`)
and the command's own options - and `run(cfg, ...) -> Result`, a dataclass the CLI
renders and `--json` prints. A command module imports only light modules at its top (options, settings, configs):
`bertkit --help` and every option error come before torch is imported; `run` imports the library it calls.
`registry` maps command names to their modules and configs."""
