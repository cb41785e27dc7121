"""The JSON API under ``/api/``: a thin front-end over ``nexopoll.services``
(the CLI, the admin and the LLM tools use the same verbs).

Requests are validated by the pydantic models in :mod:`.schemas`, and the OpenAPI
3.1 document at ``/api/openapi.json`` is generated from those same models and the
route table in :mod:`.views`. Every answer under ``/api/`` is JSON (:mod:`.middleware`);
errors are ``{"error": {"code", "message", "details"}}``, 4xx for any bad input. Runs
and dry runs tick on a worker (:mod:`nexopoll.runs`): 202 and a status URL past
``NEXOPOLL_RUN_WAIT_SECS``.
"""
