"""The prediction layers, each behind the one `Layer` protocol (`hwsel.layers.base`), in the order
they are asked:

1. ``measured``   (`hwsel.layers.measured.MeasuredLayer`)     an exact match in the benchmark data;
2. ``registered`` (`hwsel.layers.registered.RegisteredLayer`) the registered champion models, inside
   their training domain;
3. ``roofline``   (`hwsel.layers.roofline.RooflineLayer`)     device peaks plus launch overhead;
4. ``rules``      (`hwsel.layers.rules.RulesLayer`)           heuristics that always answer.

`hwsel.predict.Predictor` builds them, asks them in that order and says which one answered.
Import each name from the module that defines it: this package re-exports nothing.
"""
