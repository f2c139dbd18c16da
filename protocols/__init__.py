"""Study protocols, each a package of its own: spec, analysis, pages, commands, demo.

Every protocol (``gender``, ``attributes``, ``pair_change``, ``objects``, ``questions``) is one
package and Django app, registered once: listed in ``INSTALLED_APPS``, its ``AppConfig`` names
its spec by dotted path (``protocol_spec``, read by ``studies.protocols.PROTOCOLS``); the spec
names the rest by dotted path (its analysis, its pages' URLconf, its demo, its own output kinds),
so the core reads them lazily and never imports a protocol. No protocol imports another: what two share lives in a layer below.
"""
