"""How a setting (a field of settings.Settings) is declared: its help, and how it is
reached (flag, environment variable, chart value)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field


def setting(
    help: str,
    *,
    flag: str | bool | None = None,
    metavar: str | None = None,
    chart: bool = False,
    env: str | None = None,
    short: str | None = None,
    pattern: str | None = None,
    **bounds: Any,
) -> Any:
    """A field's help and how it is reached: `flag` overrides the flag's name (--NAME from
    the field's; False: none, the environment only), `chart`: a value of the chart's
    `operator:` section (same name, camelCase), `env` overrides the variable's name
    (SPYRE_OPERATOR_NAME); `pattern`: of the chart's schema (the field's own validator
    says more than a pattern would)."""
    extra = {"flag": flag, "metavar": metavar, "chart": chart, "env": env, "short": short}
    extra["pattern"] = pattern
    kept: dict[str, Any] = {k: v for k, v in extra.items() if v is not None and v != ""}
    return Field(description=help, json_schema_extra=kept, **bounds)


Port = Annotated[int, Field(ge=0, le=65535)]
Names = tuple[str, ...]
