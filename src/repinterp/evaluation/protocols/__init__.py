"""The paper's evaluation protocols, run over seeds and reported as mean ± std: one module per
protocol, holding what it computes on one run and the tables it is reported in.

- `unseen` (§6.4, Table 1): every method's reused interpretations scored on the unseen set.
- `coverage` (Appendix D, Table 2): ACU-GT, ACU-MD and CVR of the regions.
- `reference` (Appendix C): the scores over the top-K similar reference images.
- `q_sweep` (``q-sweep``, Appendix E): the regions' metrics for several ``|Q|``.
- `similar` (the case studies, made measurable): purity@k of the similar-image rankings.
- `sanity` (Adebayo et al., 2018): the sanity checks of RI and the CAMs through Quantus.
- `shortcut` (on the ``*-mark:F`` data sets): how well each grouping isolates, and each heat
  map points at, a planted mark.

`seeded.evaluate` runs a protocol over seeded runs and aggregates them; `markdown.
results_markdown` reports them; `cells` holds the table cells all share, `common` what several
protocols compute alike. All numbers are percentages (ROAD: percentage points; ``sanity``:
correlations and SSIM; ``shortcut``: F1 and AMI in [0, 1]).

The pieces: the model and data (`repinterp.evaluation.setup.Setup`), one seeded run
(`repinterp.evaluation.run.Run`), the compared methods (`repinterp.evaluation.methods`), the
scores (`repinterp.evaluation.scoring`). The results' files: `repinterp.report`.
"""

from .cells import cell, comparison_cell, mean_std
from .markdown import results_markdown
from .reference import COMMON_S_METHOD
from .seeded import evaluate
from .similar import RANKINGS
from .unseen import overview_markdown

__all__ = [
    "COMMON_S_METHOD",
    "RANKINGS",
    "cell",
    "comparison_cell",
    "evaluate",
    "mean_std",
    "overview_markdown",
    "results_markdown",
]
