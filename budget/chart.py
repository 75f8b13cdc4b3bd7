"""`--chart FILE`: the plan as a stacked bar, written at the CLI's edge (matplotlib optional)."""

from __future__ import annotations

from pathlib import Path

from budget.errors import BudgetError
from budget.plan import Plan
from budget.profiles import GiB


def write_chart(plan: Plan, path: Path) -> None:
    """A stacked bar of the components against usable memory (PNG or SVG)."""
    if path.suffix.lower() not in (".png", ".svg"):
        raise BudgetError(f"chart={str(path)!r}; the file must end in .png or .svg")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BudgetError("--chart needs matplotlib: pip install 'sparkserve[chart]'") from None
    fig, ax = plt.subplots(figsize=(9, 2.8))
    left = 0.0
    for name, size in sorted(plan.components.items(), key=lambda kv: -kv[1]):
        ax.barh([0], [size / GiB], left=left, label=f"{name} {size / GiB:.1f}")
        left += size / GiB
    ax.axvline(plan.usable_bytes / GiB, color="black", linestyle="--", label="usable")
    ax.set_xlabel("GiB")
    ax.set_yticks([])
    ax.set_title(
        f"{plan.model_name} on {plan.settings.hardware.name}: "
        f"{'fits' if plan.fits else 'does not fit'}"
    )
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.3))
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
