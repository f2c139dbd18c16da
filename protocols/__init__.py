"""Study protocols, each a package and Django app of its own (spec, analysis, pages, commands,
demo), registered once by its ``AppConfig``; no protocol imports another."""
