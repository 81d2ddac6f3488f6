"""The bundled TensorFlow trainer: `python -m trainers.tf_multiworker`.

Importing this package selects the Keras 2 implementation (`tf-keras`) before TensorFlow is
imported: `TF_USE_LEGACY_KERAS=1` makes `tf.keras` the tf-keras package, because Keras 3
fails inside MultiWorkerMirroredStrategy's variable creation. Users need not set anything.
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
