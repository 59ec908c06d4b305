"""The app's model registry: Django loads `actions.models` when the app is ready, and each room
keeps its models in its own `models.py`. Importing the rooms here registers every model of the
app; code imports a model from its room, never from here."""

# isort: skip_file
# In this order: the lifecycles register with the core as their modules load (action, account
# change, spending permission), and the console and admin list them in that order.
from actions.execution import models as execution
from actions.accounts import models as accounts
from actions.permissions import models as permissions
from actions.bridges import models as bridges
from actions.card import models as card
from actions.ramps import models as ramps
from actions.history import models as history

ROOMS = (execution, accounts, permissions, bridges, card, ramps, history)
