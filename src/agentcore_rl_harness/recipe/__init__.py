"""`recipe=auto`: training choices made from what a run observes, each with its reason.

    RecipeConfig   the `recipe` node (recipe=auto | recipe=none) and the bounds of each choice
    Choice         one choice: a config key, the value taken, why, and when (start-up or a step)
    RecipeLog      the run's choices: printed as they are made, kept in RUN_DIR/recipe.json
    explicit_keys  the keys the user set (overrides, a config file): a choice never touches them
    startup        choices before the model loads: dtypes (measured), max_tokens, LoRA rank / lr
    exploration    between steps: a larger group when too few groups teach anything
    initial_kl     KL(initial policy || policy now) on the tokens the first step sampled

The run-side glue (applying start-up choices to the config, the automatic warm-up with its
train-row probes) is `run/recipe.py`.
"""
