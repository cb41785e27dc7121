"""The JSON API under ``/api/``: a thin front-end over ``nexopoll.services`` and
``nexopoll.operations`` (the CLI, the admin and the LLM tools use the same verbs).

Requests are validated by the pydantic models in :mod:`.schemas`, and the OpenAPI
3.1 document at ``/api/openapi.json`` is generated from those same models and the
route table in :mod:`.views`. Errors are ``{"error": {"code", "message"}}``.
"""
