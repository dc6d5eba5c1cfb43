"""ACE baseline: Automatic Concept-based Explanations (Ghorbani et al., NeurIPS 2019) in PyTorch.

A port of the official TensorFlow 1 code (github.com/amiratag/ACE: ``ace.py``, ``ace_run.py``
and the ``tcav`` library it calls), plus the reuse on new images that the RI paper (§6.1)
describes, which the original does not have. Modules, by step: ``segments`` (the segments and
their patches, steps 1-2), ``concept_tests`` (a cluster's spread test and a CAV's TCAV score,
steps 3-4), ``reuse`` (a new image's segments assigned to the concepts and kept, most important
first) and ``discovery`` (``ACE``, which runs them with the model, and ``Concept``). Each name
is exported here.

Discovery (``ACE.fit``), as the original:

1. Segments: SLIC at ``n_segments`` 15, 50 and 80 (``compactness`` 20, ``sigma`` 1); a segment
   is kept if it covers more than 0.1% of the image and its Jaccard overlap with every segment
   kept at an earlier resolution is at most 0.5.
2. Patches: the segment on a grey fill of 117/255 (in [0, 1] pixel space, before
   normalisation), cropped to its bounding box and resized (bicubic) to the input size.
3. Concepts: k-means (25 clusters) on the patches' target-layer activations averaged over
   space. A cluster of ``n`` patches from ``u`` distinct images out of ``D`` discovery images
   is kept if ``n > min_imgs`` and (``u > 0.5 n``) or (``u > 0.25 n`` and ``u > 0.25 D``) or
   (``u > 0.1 n`` and ``u > 0.5 D``) (the official ``discover_concepts``); it keeps its
   ``max_imgs`` patches nearest the centre.
4. Importance: for each concept and each of ``n_random`` random sets, a CAV is fitted on the
   flattened activations (tcav: ``SGDClassifier(alpha=0.01, max_iter=1000, tol=1e-3)`` on a
   stratified 67% split of a set balanced by truncation; the CAV is the unit vector pointing
   to the concept). Its TCAV score is the share of discovery images whose directional
   derivative, the gradient at the target layer of the class's log-softmax probability
   dotted with the CAV, is positive (the official code takes the gradient of the
   cross-entropy loss and counts negative products: the same sign). One more random set against
   the ``n_random`` ones gives random-vs-random scores; a concept is kept if the two-sided
   paired t-test (``scipy.stats.ttest_rel``, as ``do_statistical_testings``) of its scores
   against those gives ``p <= p_value``. Importance is the mean TCAV score.

Reuse (``ACE.keep_masks``, from the RI paper): a new image is segmented the same way; a
segment farther (Euclidean, in averaged-activation space) from every concept centre than that
concept's farthest kept member is dropped, the others go to the nearest centre and are ranked
by its importance (ties: larger segment first, then segmentation order). For AD/AI the
segments are kept in that order until more than ``fraction`` of the pixels (their union) is
kept. An image without a usable segment, or a fit without a significant concept, keeps
nothing: an all-black image, the honest outcome.

Departures from the original:

- Segment labels are those SLIC returns (``np.unique``); the original loops over
  ``range(segments.max())``, which, with labels starting at 1 in current scikit-image (at 0
  in the version it was written for), skips the last segment of every resolution.
- One-channel images are repeated to three channels before SLIC, so that SLIC works in Lab as
  for the original's RGB images and ``compactness`` 20 means the same thing.
- The bounding box includes its last row and column (the original's ``patch[h1:h2, w1:w2]``
  drops them); patches are resized in float, without the original's uint8 rounding, with
  torch's antialiased bicubic, which is PIL's bicubic (the original's) up to float error.
- Patches are kept in segmentation order (the original pops them in reverse); k-means uses
  ``n_init=10`` (scikit-learn's default when the original was written) and ``random_state=seed``;
  every split and ``SGDClassifier`` is seeded; the number of clusters is at most the number
  of patches.
- Random sets: the original uses ``max_imgs`` random ImageNet images per set. Here they are
  ``max_imgs`` images drawn (seeded, without replacement within a set) from
  ``random_images01``, e.g. reference images outside the group; without it, ``max_imgs``
  random patches of the discovery segments.
- TCAV scores are computed on the discovery images; the original uses ``max_imgs`` other
  images of the class. The log-softmax is of the logits: tcav's public image-model wrappers
  apply the cross-entropy to the softmax output instead (``logits=self.pred``), which is not
  copied. ``tcav_output="logit"`` uses the class logit's gradient (the TCAV paper's
  definition).
- A NaN p-value (identical score lists) fails the test; the original keeps such concepts
  (``NaN > 0.01`` is false).
- One target layer per fit (the original loops over several bottlenecks); the discovery images
  are whatever group the caller passes (``ace_run.py`` takes 40 images of a class folder).

Defaults (quick, for 2-core machines) against the original's (``ace_run.py`` /
``ConceptDiscovery``): ``n_random`` 10 (20 / 2), ``max_imgs`` 40 (40 / 40), ``min_imgs`` 20
(40 / 20), ``n_concepts`` 25 (25), ``p_value`` 0.01 (0.01).
"""

from .concept_tests import passes_spread_test, tcav_score
from .discovery import ACE, Concept
from .reuse import assign_to_concepts, keep_segments
from .segments import GREY_FILL, Segments, grey_patch, segment, slic_label_maps, unique_segments

__all__ = [
    "ACE",
    "GREY_FILL",
    "Concept",
    "Segments",
    "assign_to_concepts",
    "grey_patch",
    "keep_segments",
    "passes_spread_test",
    "segment",
    "slic_label_maps",
    "tcav_score",
    "unique_segments",
]
