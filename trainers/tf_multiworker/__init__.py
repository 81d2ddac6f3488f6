"""The bundled TensorFlow trainer: `python -m trainstack.trainers.tf_multiworker`.

Importing this package chooses the trainer's Keras 2 before TensorFlow is imported
(`trainstack.trainers.tf_multiworker.keras_setup`): on TensorFlow >= 2.16 it sets
`TF_USE_LEGACY_KERAS=1`, so `tf.keras` is the tf-keras package (Keras 3 fails inside
MultiWorkerMirroredStrategy's variable creation); below 2.16 it removes the variable, so
`tf.keras` is the Keras 2 built into TensorFlow. Users need not set anything.
"""

import os

from trainstack.trainers.tf_multiworker.keras_setup import select_keras_environment

select_keras_environment(os.environ)
