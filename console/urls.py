from django.urls import path

from console import views

urlpatterns = [
    path("", views.home, name="home"),
    path("attention.csv", views.attention_csv, name="attention-csv"),
    path("search/", views.search, name="search"),
    path("search.csv", views.search_csv, name="search-csv"),
    path("bulk/preview/", views.bulk_preview, name="bulk-preview"),
    path("bulk/apply/", views.bulk_apply, name="bulk-apply"),
]
