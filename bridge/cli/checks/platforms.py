"""Doctor's platform checks (credentials valid, webhook registered), which belong to the
adapters: each enabled adapter's spec may carry a ``doctor`` coroutine
(:attr:`bridge.ports.AdapterSpec.doctor`), run here with a timeout, so the core never imports
an adapter. What they report is masked like the log, so no secret reaches the output.
"""

from __future__ import annotations

import asyncio

from ... import rules
from ...config import CoreSettings
from ...logs import SecretMasker, secret_values
from ...ports import AdapterSpec, DoctorCheck
from .check import Check

PLATFORM_TIMEOUT_S = 30.0


async def _platform(spec: AdapterSpec, section: object, timeout_s: float) -> list[Check]:
    assert spec.doctor is not None
    try:
        found: list[DoctorCheck] = await asyncio.wait_for(spec.doctor(section), timeout_s)
    except TimeoutError:
        return [
            Check(
                False,
                f"{spec.name} checks finished within {timeout_s:g}s",
                f"check the network and {spec.section}.api_url",
            )
        ]
    except Exception as exc:  # an adapter's check must not stop the others
        return [
            Check(
                False,
                f"{spec.name} checks ran ({type(exc).__name__}: {exc})",
                f"check [{spec.section}] in the configuration",
            )
        ]
    return [Check(c.ok, c.what, c.fix) for c in found]


async def platform_checks(
    settings: CoreSettings,
    specs: dict[str, AdapterSpec],
    timeout_s: float = PLATFORM_TIMEOUT_S,
) -> list[Check]:
    """Every enabled adapter's own checks, concurrently, each bounded by ``timeout_s``.

    Whatever an adapter reports is passed through the log's secret masker: a token inside
    an error message or a URL never reaches the output.
    """
    jobs = [
        _platform(spec, section_settings, timeout_s)
        for spec, section_settings in rules.enabled_adapters(settings, specs)
        if spec.doctor is not None
    ]
    masker = SecretMasker(secret_values(settings))
    return [
        Check(c.ok, masker.mask(c.what), masker.mask(c.fix))
        for found in await asyncio.gather(*jobs)
        for c in found
    ]
