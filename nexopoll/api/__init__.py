"""The JSON API under ``/api/``: a thin front-end over ``nexopoll.services``
(the CLI, the admin and the LLM tools use the same verbs).

Built on django-ninja: the operations are in :mod:`.views`, each guarded by a
:class:`.gate.Gate` (its ``auth``); requests are validated by the pydantic models in
:mod:`.schemas`, and ninja generates the OpenAPI 3.1 document at ``/api/openapi.json``
from them (completed in :mod:`.app`, which also maps every error to the envelope).
Every answer under ``/api/`` is JSON (:mod:`.middleware`); errors are
``{"error": {"code", "message", "details"}}``, 4xx for any bad input. Runs and dry
runs tick on a worker (:mod:`nexopoll.services.runs`): 202 and a status URL past
``NEXOPOLL_RUN_WAIT_SECS``.
"""
