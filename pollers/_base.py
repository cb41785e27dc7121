"""What every built-in poller with a pydantic config shares: validating it, and
turning pydantic's errors into one :class:`ConfigError` that names the field."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ValidationError

from nexopoll.core.contract import Poller
from nexopoll.core.errors import ConfigError
from nexopoll.core.templates import TemplateError, check_template


def config_error(exc: ValidationError) -> ConfigError:
    """The first problem as the error (``path`` = ``config.<field>``), the rest appended."""
    problems = []
    for err in exc.errors(include_url=False, include_input=False):
        path = ".".join(["config", *(str(p) for p in err["loc"])])
        problems.append((path, err["msg"].removeprefix("Value error, ")))
    path, reason = problems[0]
    if len(problems) > 1:
        reason += "; also " + "; ".join(f"{p}: {m}" for p, m in problems[1:])
    return ConfigError(reason, path=path)


class ConfiguredPoller(Poller):
    """A poller whose ``config:`` is one pydantic model, ``config_model``.

    ``validate`` (at load) and ``parse_config`` (at every tick, with ``${VAR}``
    expanded) apply the same model, so what loads is what runs.
    """

    config_model: ClassVar[type[BaseModel]]

    def parse_config(self, raw: dict[str, Any]) -> Any:
        """The typed config. Raises ConfigError naming the first bad field."""
        try:
            return self.config_model.model_validate(raw)
        except ValidationError as exc:
            raise config_error(exc) from None

    def validate(self, config: dict[str, Any]) -> None:
        self.parse_config(config)


def _checked_template(value: str) -> str:
    try:
        check_template(value)
    except TemplateError as exc:
        raise ValueError(str(exc)) from None
    return value


# A message template, checked at load (unknown syntax, non-ASCII indexes…).
TemplateStr = Annotated[str, AfterValidator(_checked_template)]
