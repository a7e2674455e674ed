"""The evidence picture an owner gets with each notice: the process over the last hours,
drawn from Prometheus with the rules' own recorded series and the thresholds drawn in.

`queries` says what is asked (pure), `fetch` asks Prometheus, `chart` draws (matplotlib, the
`evidence` extra), `links` signs the picture's URL, and `pictures` does the three in order
and keeps the result with its case."""
