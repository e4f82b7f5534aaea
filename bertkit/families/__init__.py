"""Problem families: what differs between the kinds of problem bertkit reads (sentences, words, spans), behind one
protocol (`base.Family`) and a registry (`registry.family_of`). Commands ask `family_of` once and call the family."""
