"""sparkserve budget planner: vLLM-exact memory plans and the flags that go with them."""

from budget.errors import BudgetError
from budget.options import PlanOptions

__all__ = ["BudgetError", "PlanOptions"]
