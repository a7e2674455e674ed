"""The drawn picture's pixels: the threshold and the line drawn, the shading only where the
rule held; text never parsed as math."""

from __future__ import annotations

import io
import struct

from actuator.evidence import chart
from actuator.evidence.fetch import Evidence, PanelData, Series
from actuator.evidence.queries import Subject, panels
from exporter.thresholds import SHIPPED


def _pixels(png: bytes):  # type: ignore[no-untyped-def]
    from matplotlib.image import imread

    return imread(io.BytesIO(png), format="png")


def _has_colour(image, colour: str, least: float = 0.6) -> bool:  # type: ignore[no-untyped-def]
    """At least 50 pixels of `colour`, or of it blended over white by antialiasing (with
    at least `least` of it)."""
    import numpy as np
    from matplotlib.colors import to_rgb

    d = np.array(to_rgb(colour)) - 1.0
    off_white = image[:, :, :3].reshape(-1, 3) - 1.0
    a = off_white @ d / (d @ d)
    residual = np.linalg.norm(off_white - np.outer(a, d), axis=1)
    return bool(((a >= least) & (a <= 1.02) & (residual < 0.04)).sum() > 50)


def _evidence(idle: tuple[float, ...]) -> Evidence:
    subject = Subject("GPU-0", 7, 0)
    times = tuple(float(t) for t in range(0, 3600, 60))
    data = tuple(
        PanelData(p, (Series(times, tuple(0.0 for _ in times)),) if p.unit != "writes" else ())
        for p in panels(subject, SHIPPED)
    )
    return Evidence(0.0, 3600.0, 60.0, data, idle)


def test_the_picture_draws_the_thresholds_and_shades_where_the_rule_held() -> None:
    shaded = chart.render(_evidence(tuple(float(t) for t in range(1800, 3600, 60))), "PID 7")
    plain = chart.render(_evidence(()), "PID 7")
    assert shaded[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", shaded[16:24])  # the IHDR chunk
    assert (width, height) == (640, 600)
    image = _pixels(shaded)
    assert _has_colour(image, chart.LIMIT_COLOUR) and _has_colour(image, chart.LINE_COLOUR)
    # The idle colour, blended at alpha 0.5 over white, appears only where the rule held.
    from matplotlib.colors import to_rgb

    blended = "#" + "".join(f"{round(255 * (1 + c) / 2):02x}" for c in to_rgb(chart.IDLE_COLOUR))
    assert _has_colour(image, blended, 0.95)
    assert not _has_colour(_pixels(plain), blended, 0.95)


def test_text_in_a_picture_is_never_parsed_as_math() -> None:
    png = chart.render(_evidence(()), "PID 7 on $\\frac{a}{b}$ GPU 0")  # would fail as mathtext
    assert png[:4] == b"\x89PNG"
