"""One adapter per API on the shared serving pipeline (:mod:`blueprints.serving`).

Flask-free.  ``protocol`` holds the typed requests the schemas load into; ``base`` the
:class:`~generation.adapters.base.Adapter` interface and what every adapter shares; one module
per API translates its typed request onto the engine's
:class:`~generation.engine.request.GenerationRequest` and renders the engine's sequences into its wire
format.  Import rule: routes -> schemas -> adapters -> engine; the engine never imports this.
"""
