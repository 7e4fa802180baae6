"""The pipelines' aggregations (`app.processor.aggregation.Aggregation`): a fork adds or replaces
one module here and names its class in the processor's `aggregation.class`."""
