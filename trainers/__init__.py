if __name__ != "trainstack.trainers":  # one import name per module: two would copy every class
    raise ImportError(f"import trainstack.trainers, not {__name__}")
