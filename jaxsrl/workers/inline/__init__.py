"""The inline actor (``--inference=inline``): the actor with an action client that runs the policy itself."""
