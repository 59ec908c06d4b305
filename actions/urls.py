from django.urls import path

from actions import views

app_name = "actions"

api_urlpatterns = [
    path("actions/<str:action_id>", views.ActionStatusView.as_view(), name="action-status"),
]

staff_urlpatterns = [
    path("actions/<uuid:action_id>/", views.action_timeline, name="action-timeline"),
]
