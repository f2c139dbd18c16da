"""Study protocols, each a package of its own: spec, analysis, pages, commands, demo.

Every protocol (``gender``, ``attributes``, ``pair_change``, ``objects``, ``questions``) is one
package, registered once by the dotted path of its spec (``studies.protocols.PROTOCOLS``); the
spec names the rest by dotted path (its analysis, its pages' URLconf, its demo), so the core reads
them lazily and never imports a protocol. Each package is a Django app, so its templates and
commands are found. No protocol imports another: what two share lives in a layer below.
"""
