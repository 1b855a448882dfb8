"""The LangGraph layer: state fields, the node wrapper, the graph wrapper, streaming, terminals."""
