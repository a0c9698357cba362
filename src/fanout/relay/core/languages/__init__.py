"""Each view language's parts in the relay's algebra of views, one module a language, named by
its ``views.registry.Language``: what release asks it (``RELEASE``, a
``relay.core.release.ReleasePart``) and its access rules (``RULES``, a
``relay.core.rules.RulesPart``). Nothing imports them but through the registry.
"""
