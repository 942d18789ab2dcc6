SELECT k, v FROM {{ params.ns }}.src WHERE k > {{ params.min_k }}
