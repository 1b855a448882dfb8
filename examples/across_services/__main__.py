"""`python -m examples.across_services`: A (planner) -> B (retriever) -> a slow search service,
all on loopback. One request with 1.5 s left; what each hop saw."""

from __future__ import annotations

import time

import httpx

from examples.across_services import planner, retriever
from examples.across_services._serve import Served
from langgraph_deadline.testing import SlowServer


def main() -> None:
    with SlowServer() as search:
        b_app = retriever.create_app(search_url=search.url("/slow?delay=10"))
        with Served(b_app) as b:
            a_app = planner.create_app(retriever_url=b.url())
            with Served(a_app) as a:
                print(f"search (takes 10 s)  {search.url()}")
                print(f"B retriever (30 s)   {b.url('/retrieve')}")
                print(f"A planner   (10 s)   {a.url('/ask')}")
                print("\nPOST /ask with X-Request-Timeout-Ms: 1500")
                with httpx.Client(timeout=60) as client:
                    client.get(a.url("/"))  # warm up: connect once (404)
                    t0 = time.monotonic()
                    r = client.post(
                        a.url("/ask"),
                        json={"question": "Why was my order late?"},
                        headers={"X-Request-Timeout-Ms": "1500"},
                    )
                print(f"  A answered {r.status_code} after {time.monotonic() - t0:.2f} s: {r.text}")
                search.wait_disconnected(2.0)
                time.sleep(0.1)
                for name, app in (("A", a_app), ("B", b_app)):
                    for run in app.state.runs:
                        budget = f"{run.budget:.2f} s" if run.budget is not None else "none"
                        print(
                            f"  {name}: run got {budget}, ended {run.terminal} in {run.step} "
                            f"at {run.ended - t0:.2f} s"
                        )
                for req in search.requests:
                    left = req.headers.get("x-request-timeout-ms")
                    closed = req.disconnected - t0 if req.disconnected else None
                    when = f"closed by B at {closed:.2f} s" if closed else "answered"
                    print(f"  search: asked with {left} ms left, {when}")


if __name__ == "__main__":
    main()
