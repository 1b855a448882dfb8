"""What each step really takes, learned from its records: a latency book and the caps it gives.

```python
from langgraph_deadline import with_deadlines
from langgraph_deadline.learn import LatencyBook, learned

book = LatencyBook()  # hears every step of this process from now on
graph = with_deadlines(builder, timeout=30.0, caps={"search": learned(book, quantile=0.95)})
```

`LatencyBook` keeps one `LatencySketch` per step (finished and cut samples); `learned(...)` is a
cap that follows the book's quantile (an `Estimate`) within the bounds you give, a `Learned` rule.
"""

from ._learn.book import LatencyBook
from ._learn.policy import Learned, learned
from ._learn.sketch import Estimate, LatencySketch

__all__ = ["Estimate", "LatencyBook", "LatencySketch", "Learned", "learned"]
